"""What a user runs, on top of everything else: the search and the deploy, the report and its plots, the sweep, val and
the gate, predict in one line, the fallback log read back. Each module is imported when first used
(``yolo_edge.__init__``): a board that only loads a bundle imports ``predict`` alone.
"""
