"""Built-in scheduler plugins: one package each, its class `PLUGIN` in `<name>/plugin.py` (see `..framework`)."""
