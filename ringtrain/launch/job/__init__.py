"""Starting the job's processes: the run directory, the secrets' delivery, the launcher process.

``rundir`` (the run directory, held through a descriptor), ``deliver`` (the 0600 secrets file
over ssh), ``run`` (mpirun / horovodrun / srun as a process group), ``driverssh`` (horovodrun's
ssh clients to a lost host), ``hosts`` (the inventory the attempt reads).
"""
