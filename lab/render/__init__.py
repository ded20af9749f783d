"""Rendering: Rich terminal output and matplotlib figures. The only place Rich lives."""
