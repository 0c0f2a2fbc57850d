"""The component's entry module (`operators.<component>.main`, see `operators.components`); it lives in the shell."""

from operators.scheduler.shell.main import COMPONENT, main, parser

__all__ = ["COMPONENT", "main", "parser"]
