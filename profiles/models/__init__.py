"""Model builders: each turns a validated spec into an ``nn.Module`` on the meta device."""
