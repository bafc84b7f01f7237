"""Cluster sources: where the nodes come from (cluster.yaml `nodes:` with hostlist
expressions, a hostfile, a Slurm job). A source yields nodes only, in rank order; how
they are reached is the transport's business (ddptui.transport). Core layer."""
