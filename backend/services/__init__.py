"""Plain functions behind the routes: downsampling, compare, waterfall, sweeps, export, Prometheus."""
