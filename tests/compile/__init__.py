"""torch.compile tests: no graph breaks, no recompiles as values change, compiled equals eager."""
