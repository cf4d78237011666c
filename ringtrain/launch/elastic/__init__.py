"""``--elastic``: losses Horovod absorbs (``watch``), the discovery list and rested hosts
(``sparekeeper``), spares (``spares``) and warm spares (``warmspares``)."""
