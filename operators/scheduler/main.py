"""The component's entry module (`operators.<component>.main`, see `operators.components`); it lives in the shell."""

from operators.scheduler.shell.main import main, parser, serve

__all__ = ["main", "parser", "serve"]
