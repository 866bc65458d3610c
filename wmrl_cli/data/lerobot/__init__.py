"""LeRobotDataset v3 in and out: layout.py (the files), reader.py (a dataset as an episode
store), writer.py (an episode store as a dataset), check.py (the format's schema check)."""
