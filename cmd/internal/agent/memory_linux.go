//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReleaseBinaryPages lowers the resident memory of the agent's own
// binary once start-up is over, leaving resident only the pages it goes
// on using, each mapped in 4 KiB pages.
//
// Why: the page cache holds a file in large folios when it was written
// or read in large chunks (a freshly linked binary, an image layer
// unpacked with large writes: up to 2 MiB on ext4 and xfs), and a recent
// kernel (measured: Linux 6.18) maps the whole folio on a fault, with one
// PMD entry when it is 2 MiB. Then nearly every byte of the 36 MB binary
// counts in the agent's RSS, although start-up touched only part of it
// and serving far less (docs/performance.md, "Memory").
//
// For each read-only mapping of the executable that never held a private
// (copied-on-write) page it sets MADV_NOHUGEPAGE (no PMD mapping, no
// khugepaged collapse from now on) and, for the time of the release,
// MADV_RANDOM (a fault reads one 4 KiB page, no read-ahead into large
// folios); MADV_PAGEOUT then drops the folios only this process maps
// from the page cache (when the process owns the file or may write it;
// otherwise the kernel skips them), and MADV_DONTNEED unmaps what is left
// (pages also mapped elsewhere stay cached). The file is then read through once with
// POSIX_FADV_RANDOM, which caches it again in 4 KiB folios, so that what
// the agent still uses faults back in from memory, without I/O, 64 KiB
// (the kernel's fault-around) at a time. MADV_NORMAL restores read-ahead
// for later page-ins.
//
// Nothing is lost: the mappings are never written, and writable mappings
// and read-only ones holding private pages (the relocated RELRO data of
// a dynamically linked binary) are left alone. A page the kernel will
// not drop (dirty, as a binary just written is until writeback) stays
// as it was. The cost is one read of the binary, after start-up.
func ReleaseBinaryPages() (BinaryPages, error) {
	var res BinaryPages
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return res, fmt.Errorf("releasing the binary's pages: %w", err)
	}
	defer func() { _ = f.Close() }()
	maps, err := binaryMappings(f)
	if err != nil {
		return res, err
	}
	res.Mappings = len(maps)
	for _, m := range maps {
		res.Before += m.rss
	}
	// Read-ahead comes back whatever happens below.
	defer func() {
		for _, m := range maps {
			_ = madvise(uintptr(m.start), uintptr(m.end-m.start), unix.MADV_NORMAL)
		}
	}()
	for _, m := range maps {
		for _, adv := range []int{unix.MADV_NOHUGEPAGE, unix.MADV_RANDOM, unix.MADV_PAGEOUT, unix.MADV_DONTNEED} {
			err := madvise(uintptr(m.start), uintptr(m.end-m.start), adv)
			if errors.Is(err, unix.EINVAL) && adv == unix.MADV_PAGEOUT {
				continue // before Linux 5.4: MADV_DONTNEED and the fadvise below do most of it
			}
			if err != nil {
				return res, fmt.Errorf("releasing the binary's pages: madvise(%#x-%#x, %s): %w", m.start, m.end, adviceName(adv), err)
			}
		}
	}
	if err := recacheSmall(f); err != nil {
		return res, err
	}
	after, err := binaryMappings(f)
	if err != nil {
		return res, err
	}
	for _, m := range after {
		res.After += m.rss
	}
	return res, nil
}

// binaryMappings returns the mappings of the open executable f that
// ReleaseBinaryPages may release (smapsEntry.releasable).
func binaryMappings(f *os.File) ([]smapsEntry, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("releasing the binary's pages: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("releasing the binary's pages: no inode for %s", f.Name())
	}
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("releasing the binary's pages: %w", err)
	}
	all, err := parseSmaps(data)
	if err != nil {
		return nil, fmt.Errorf("releasing the binary's pages: /proc/self/smaps: %w", err)
	}
	var out []smapsEntry
	for _, m := range all {
		if m.inode == st.Ino && m.dev == uint64(st.Dev) && m.releasable() {
			out = append(out, m)
		}
	}
	return out, nil
}

// recacheSmall drops the executable's cached pages that no process maps
// and reads it through without read-ahead, so that the page cache holds
// it in 4 KiB folios.
func recacheSmall(f *os.File) error {
	fd := int(f.Fd())
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("releasing the binary's pages: fadvise(%s, POSIX_FADV_DONTNEED): %w", f.Name(), err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		return fmt.Errorf("releasing the binary's pages: fadvise(%s, POSIX_FADV_RANDOM): %w", f.Name(), err)
	}
	buf := make([]byte, recacheChunk)
	for off := int64(0); ; off += int64(len(buf)) {
		_, err := f.ReadAt(buf, off)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("releasing the binary's pages: reading %s at %d: %w", f.Name(), off, err)
		}
	}
}

// recacheChunk is the read size of recacheSmall.
const recacheChunk = 256 << 10

// adviceName names the madvise advice ReleaseBinaryPages gives, for errors.
func adviceName(adv int) string {
	switch adv {
	case unix.MADV_NOHUGEPAGE:
		return "MADV_NOHUGEPAGE"
	case unix.MADV_RANDOM:
		return "MADV_RANDOM"
	case unix.MADV_PAGEOUT:
		return "MADV_PAGEOUT"
	case unix.MADV_DONTNEED:
		return "MADV_DONTNEED"
	case unix.MADV_NORMAL:
		return "MADV_NORMAL"
	}
	return strconv.Itoa(adv)
}

// madvise gives advice on [addr, addr+size): a raw system call, since the
// range is not Go memory and x/sys/unix's Madvise takes a slice.
func madvise(addr, size uintptr, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, size, uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// smapsEntry is one mapping of /proc/<pid>/smaps, with what
// ReleaseBinaryPages needs to decide on it.
type smapsEntry struct {
	start, end uint64
	perms      string
	dev        uint64
	inode      uint64
	rss        int64 // bytes
	anonymous  int64 // bytes of private, copied-on-write pages
	pmdMapped  int64 // bytes of file pages mapped in 2 MiB pages (FilePmdMapped)
	flags      []string
}

// releasable reports whether dropping the mapping's pages loses nothing:
// a private file mapping never written (not writable now, and never
// accountable as writable: VmFlags "ac"), with no private page in it.
func (m smapsEntry) releasable() bool {
	if len(m.perms) < 4 || m.perms[0] != 'r' || m.perms[1] != '-' || m.perms[3] != 'p' || m.anonymous != 0 {
		return false
	}
	for _, f := range m.flags {
		if f == "ac" || f == "wr" {
			return false
		}
	}
	return true
}

// parseSmaps reads the mappings of a /proc/<pid>/smaps document.
func parseSmaps(data []byte) ([]smapsEntry, error) {
	var out []smapsEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") {
			m, err := parseSmapsHeader(fields)
			if err != nil {
				return nil, fmt.Errorf("line %d %q: %w", line, text, err)
			}
			out = append(out, m)
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("line %d %q: a field before any mapping", line, text)
		}
		m := &out[len(out)-1]
		switch fields[0] {
		case "VmFlags:":
			m.flags = fields[1:]
		case "Rss:", "Anonymous:", "FilePmdMapped:":
			if len(fields) != 3 || fields[2] != "kB" {
				return nil, fmt.Errorf("line %d %q: want \"<n> kB\"", line, text)
			}
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d %q: %w", line, text, err)
			}
			switch fields[0] {
			case "Rss:":
				m.rss = kb << 10
			case "Anonymous:":
				m.anonymous = kb << 10
			default:
				m.pmdMapped = kb << 10
			}
		}
	}
	return out, sc.Err()
}

// parseSmapsHeader reads a mapping's first line:
// "start-end perms offset major:minor inode [path]".
func parseSmapsHeader(fields []string) (smapsEntry, error) {
	var m smapsEntry
	if len(fields) < 5 {
		return m, fmt.Errorf("want at least 5 fields, have %d", len(fields))
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return m, fmt.Errorf("address range %q: no '-'", fields[0])
	}
	var err error
	if m.start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("address range %q: %w", fields[0], err)
	}
	if m.end, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("address range %q: %w", fields[0], err)
	}
	m.perms = fields[1]
	maj, minor, ok := strings.Cut(fields[3], ":")
	if !ok {
		return m, fmt.Errorf("device %q: no ':'", fields[3])
	}
	ma, err := strconv.ParseUint(maj, 16, 32)
	if err != nil {
		return m, fmt.Errorf("device %q: %w", fields[3], err)
	}
	mi, err := strconv.ParseUint(minor, 16, 32)
	if err != nil {
		return m, fmt.Errorf("device %q: %w", fields[3], err)
	}
	m.dev = unix.Mkdev(uint32(ma), uint32(mi))
	if m.inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return m, fmt.Errorf("inode %q: %w", fields[4], err)
	}
	return m, nil
}
