"""Command line: ``yolo-edge <subcommand>``. Each subcommand module parses, calls one library function, prints."""
