"""What every chapter shares: settings (config), argument checks, the figure style (plot),
the training loop (train), the memory yardstick (memory) and printed tables (table).

Imports nothing from the other layers of the package."""
