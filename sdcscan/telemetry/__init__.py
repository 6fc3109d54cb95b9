"""Host and device telemetry sampled beside a run (psutil, sysfs, NVML); it never fails a run."""
