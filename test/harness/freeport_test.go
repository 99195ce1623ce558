package harness

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange: the ports handed to components are
// outside the range outgoing connections take theirs from, and free.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if low > 20000 && port >= low {
			t.Errorf("FreePort = %d, in the ephemeral range (from %d)", port, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("FreePort = %d, not free: %v", port, err)
			continue
		}
		_ = l.Close()
	}
}
