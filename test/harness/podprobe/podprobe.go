// Package podprobe is what the probe container of a RealNode pod reports
// about itself: its environment, the device nodes under /dev and its
// mounts, each mount with the device and inode of the file or directory
// it shows, so that a test can tell which host file a container path is
// without trusting any runtime's account of it.
//
// The probe program (internal/podimage/probe) calls Collect and prints
// the Report as one JSON line; the harness reads it back from the
// container's log.
package podprobe

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Marker starts the probe's report line in the container log, so that the
// line is told apart from anything else the container prints.
const Marker = "podprobe: "

// Report is what a probe saw from inside its container.
type Report struct {
	// Started is when the probe process started.
	Started time.Time `json:"started"`
	// Env is the process environment.
	Env map[string]string `json:"env"`
	// Devices are the device nodes under /dev, by path.
	Devices map[string]Device `json:"devices"`
	// Mounts are the process's mounts (/proc/self/mountinfo), in order.
	Mounts []Mount `json:"mounts"`
	// Touched are the files the probe was asked to create, with the error
	// each creation got ("" when it was created).
	Touched map[string]string `json:"touched,omitempty"`
	// Errors are what the probe could not look at.
	Errors []string `json:"errors,omitempty"`
}

// Device is a device node.
type Device struct {
	// Type is "c" (character) or "b" (block).
	Type string `json:"type"`
	// Major and Minor are the device numbers.
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Mount is one mount of the process.
type Mount struct {
	// Target is where it is mounted.
	Target string `json:"target"`
	// FSType is the filesystem type (tmpfs, overlay, ext4, ...).
	FSType string `json:"fsType"`
	// Options are the mount's own options (ro, nosuid, ...).
	Options string `json:"options"`
	// Dev and Ino identify the file or directory at Target (stat), the
	// same numbers the host sees for the file a bind mount shows.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Mount returns the last mount at target (the one the process sees) and
// whether there is one.
func (r *Report) Mount(target string) (Mount, bool) {
	for i := len(r.Mounts) - 1; i >= 0; i-- {
		if r.Mounts[i].Target == target {
			return r.Mounts[i], true
		}
	}
	return Mount{}, false
}

// DevicePaths returns the paths of the device nodes whose path starts with
// prefix, sorted.
func (r *Report) DevicePaths(prefix string) []string {
	var out []string
	for p := range r.Devices {
		if strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Collect looks around: it creates each of touch (writing its path into
// it), then reads the environment, /dev and /proc/self/mountinfo.
func Collect(started time.Time, touch []string) Report {
	r := Report{Started: started, Env: map[string]string{}, Devices: map[string]Device{}}
	for _, p := range touch {
		if r.Touched == nil {
			r.Touched = map[string]string{}
		}
		r.Touched[p] = ""
		if err := os.WriteFile(p, []byte(p+"\n"), 0o644); err != nil {
			r.Touched[p] = err.Error()
		}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	err := filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			return nil
		}
		if d.Type()&fs.ModeDevice == 0 {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("stat %s: %v", p, err))
			return nil
		}
		typ := "b"
		if d.Type()&fs.ModeCharDevice != 0 {
			typ = "c"
		}
		r.Devices[p] = Device{Type: typ, Major: major(st.Rdev), Minor: minor(st.Rdev)}
		return nil
	})
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	mounts, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	r.Mounts = mounts
	return r
}

// readMounts parses a mountinfo file: "id parent major:minor root target
// options [optional fields] - fstype source superoptions", and stats every
// target.
func readMounts(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mount
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 6 || sep < 0 || sep+1 >= len(fields) {
			return out, fmt.Errorf("%s: malformed line %q", path, s.Text())
		}
		m := Mount{Target: unescape(fields[4]), Options: fields[5], FSType: fields[sep+1]}
		var st syscall.Stat_t
		if err := syscall.Stat(m.Target, &st); err == nil {
			m.Dev, m.Ino = st.Dev, st.Ino
		}
		out = append(out, m)
	}
	return out, s.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// major and minor split a Linux device number (glibc's gnu_dev_major and
// gnu_dev_minor).
func major(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func minor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }
