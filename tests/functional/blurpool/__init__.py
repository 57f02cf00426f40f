"""Tests of functional/blurpool/, one file per module with public names."""
