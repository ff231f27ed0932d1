"""The runners: node (subprocess), spark (Docker) and sandbox (Hyperlight micro-VM)."""
