"""Which device a record runs on: NVML, the free check, leases, the node's scheduler service."""
