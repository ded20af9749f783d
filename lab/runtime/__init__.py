"""Runtimes: whose kernels run the lab's decode core (torch, or llama.cpp's through :mod:`lab.runtime.ggml`)."""
