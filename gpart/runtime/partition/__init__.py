"""What a rank loads: one partition (homogeneous or typed) on a device, its trainers and seed split."""
