package deviceplugin

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// kubeletConn is the one gRPC connection to the kubelet's registration
// socket that every server's registrations share. A node with four
// resources registers four times at start and after every kubelet
// restart; one connection makes that one dial and one HTTP/2 handshake
// instead of four.
//
// The connection belongs to one kubelet.sock file: a registration that
// finds another file there (the kubelet restarted) gets a new connection.
// A failed registration drops the connection, so the next attempt dials
// afresh rather than waiting out gRPC's reconnect backoff (a second), which
// would defeat the short retries of registerBackoffMin while a restarting
// kubelet has bound its socket but does not listen yet.
type kubeletConn struct {
	mu   sync.Mutex
	conn *grpc.ClientConn
	// id is the kubelet.sock file conn was made for.
	id fswatch.ID
}

// get returns the connection to the kubelet.sock at path, which was the
// file id when the caller looked, making it when there is none for that
// file.
func (k *kubeletConn) get(path string, id fswatch.ID) (*grpc.ClientConn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn != nil && id == k.id {
		return k.conn, nil
	}
	k.closeLocked()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	k.conn, k.id = conn, id
	return conn, nil
}

// drop closes conn after a failed registration, unless another
// registration has replaced it already.
func (k *kubeletConn) drop(conn *grpc.ClientConn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == conn {
		k.closeLocked()
	}
}

// close closes the connection, if any.
func (k *kubeletConn) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closeLocked()
}

func (k *kubeletConn) closeLocked() {
	if k.conn != nil {
		_ = k.conn.Close()
	}
	k.conn, k.id = nil, fswatch.ID{}
}
