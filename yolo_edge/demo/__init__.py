"""The demo: the shapes data set the shipped model was trained and is validated on (``demo.shapes``, its
generator: imported only to make images, never by ``yolo-edge run`` on a board) and the model's class names."""

CLASS_NAMES: tuple[str, ...] = ("circle", "rectangle", "triangle", "star", "cross", "ring")
