package deviceplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path
// holds 108 bytes including the terminating NUL.
const maxSocketPath = 107

// socketPrefix and socketSuffix frame every plugin socket name.
const (
	socketPrefix = "featureplug-"
	socketSuffix = ".sock"
	// hashLen is the number of hex digits of the name hash appended to
	// shortened socket names.
	hashLen = 8
)

// replicaSeparator joins a device ID and a replica number: "<uuid>::<n>".
const replicaSeparator = "::"

// SanitizeResourceName turns an extended resource name into a file name:
// the one '/' becomes '_'. Extended resource names have a DNS-subdomain
// prefix, which holds no '_', so the mapping is one-to-one.
func SanitizeResourceName(resource string) string {
	return strings.ReplaceAll(resource, "/", "_")
}

// SocketPath returns the unix socket path of the server for resource in
// dir: dir/featureplug-<sanitized name>.sock, or, when that would pass the
// 107-byte limit of socket paths, the name shortened and followed by a hash
// of the full resource name, so distinct resources never share a socket.
//
// It is the resource's first socket; a second agent on the node serving
// the same resource takes the next free slot (slotPath).
func SocketPath(dir, resource string) (string, error) {
	return socketPathWithSuffix(dir, resource, socketSuffix)
}

// socketPathWithSuffix is SocketPath with the name ending in suffix.
func socketPathWithSuffix(dir, resource, suffix string) (string, error) {
	name := socketPrefix + SanitizeResourceName(resource) + suffix
	full := filepath.Join(dir, name)
	if len(full) <= maxSocketPath {
		return full, nil
	}
	sum := sha256.Sum256([]byte(resource))
	tail := "-" + hex.EncodeToString(sum[:])[:hashLen] + suffix
	room := maxSocketPath - len(filepath.Join(dir, socketPrefix)) - len(tail)
	if room < 1 {
		return "", fmt.Errorf("directory %q is too long for a unix socket path (limit %d bytes)", dir, maxSocketPath)
	}
	short := SanitizeResourceName(resource)[:room]
	return filepath.Join(dir, socketPrefix+short+tail), nil
}

// isOwnSocketName reports whether a file name in the device-plugin
// directory is one SocketPath gives: featureplug-<...>.sock. kubelet.sock
// and other plugins' sockets never are.
func isOwnSocketName(name string) bool {
	return len(name) > len(socketPrefix)+len(socketSuffix) &&
		strings.HasPrefix(name, socketPrefix) && strings.HasSuffix(name, socketSuffix)
}

// validateDeviceName checks that a device ID or index can be used in a
// device list, a mount path and a CDI device name.
func validateDeviceName(id string) error {
	if strings.Contains(id, replicaSeparator) {
		return fmt.Errorf("%q holds %q, which is reserved for replica IDs", id, replicaSeparator)
	}
	return parser.ValidateDeviceName(id)
}
