// This file is empty on purpose: it lets link.go declare a function without a
// body, which go:linkname binds to the device manager's constructor.
