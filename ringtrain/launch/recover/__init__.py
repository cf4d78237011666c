"""What happens after an attempt ends: restart or not (``outcome``), the commit to resume from
(``commits``), a preemption (``preemption``), the GPU re-check (``recheck``) and which hosts
rest (``hostrest``)."""
