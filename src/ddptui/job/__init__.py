"""`ddptui job`: look at the user's own running, hung or crashed training job on every
node, without touching it, and say who is stuck or dead, where, and why.

Node side: probes/job.py. Here: the parsers (py-spy, NCCL RAS, flight recorder, the job's
logs), the verdict, and the report. Core layer: no Textual, no asyncssh."""
