"""The run's record, the ground floor of launch/: pure values and nothing that acts.

What ranks reported (``snapshot``, ``steptimes``), what went wrong (``failure``, ``fault``),
what an attempt ended as (``result``), the recovery ledger and its incidents (``milestones``,
``absorbed``, ``gpurecheck``) and the events' two renderings (``eventlog``). Every room above
reads and writes these; this room imports none of them.
"""
