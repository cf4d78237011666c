"""The pre-flight group: everything ringtrain checks about the hosts before a job, used by
``launch`` (every attempt), ``check`` and the benchmarks.

    hostprobe.py    probe(inventory, remote): one SSH round trip per host
    probe_parse.py  PURE: parsers of nvidia-smi, versions, ip (the ProbeReport)
    verdict.py      PURE: probe report + policy -> verdict (refuse / exclude / warn per host)
    netif.py        PURE: the subnet common to all hosts -> btl/oob_tcp_if_include, NCCL ifname
    gate.py         the pre-flight step of an attempt: probe, GPU rule, verdict, control address
    names.py        host names resolved once, in parallel, under one budget
    tfports.py      a TF strategy job's task ports free on their hosts
"""
