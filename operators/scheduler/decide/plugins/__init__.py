"""Built-in scheduler plugins: one module each, exposing its class as `PLUGIN` (see `..decide.framework`)."""
