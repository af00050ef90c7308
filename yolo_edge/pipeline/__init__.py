"""Detection pipeline around the model: letterbox preprocess, NMS postprocess, video streams."""
