"""What the scheduler knows about workloads, whatever the policy: measured scaling and
interference catalogs, memory footprints, the oracle prediction backend built from them, and the
Pollux throughput model. Sits between the core and the policies: policies, the simulator, the live
executor and the tuner read these facts; the facts import only the core."""
