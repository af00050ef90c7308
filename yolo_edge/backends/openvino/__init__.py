"""Intel OpenVINO: its runtime (``backend``), NNCF's INT8 (``nncf_int8``), its IR read back (``model``), its spec."""
