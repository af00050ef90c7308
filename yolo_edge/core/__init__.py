"""The base layer: errors, the JSON codec, files, the host, the registry of backends, the settings and profiles
(``config``), statistics: what every other layer may import.
"""
