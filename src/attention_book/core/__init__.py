"""What every chapter shares: settings (config), argument checks, the figure style (plot),
the training loop (train) and the memory yardstick (memory).

Imports nothing from the other layers of the package."""
