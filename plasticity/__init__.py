"""Plug-in plasticity remedies and diagnostics (SWD, resets/ReDo/S&P, CIR, LEAST, ...).

Each remedy is one module with one settings dataclass nested in an agent's Args and a few hook
functions. None has landed yet; see the open issue "Plasticity remedies as plug-ins".
"""
