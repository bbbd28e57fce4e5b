// Daemons that import BerylIPC see the wire (messages, envelope, socket) as well.
@_exported import BerylWire
