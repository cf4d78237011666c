"""The launcher's end of the control channel: the server (``server``), the hello and its
proofs (``hello``), and who may connect before proving the token (``admission``)."""
