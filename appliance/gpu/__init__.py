"""GPU helpers: kernel loading and the kernel cache (cupy), streams and graphs."""
