"""Native kernels: small C sources built with the system compiler at first use and loaded through ctypes,
framework-free (raw pointers), each with a framework fallback in the adapter that uses it."""
