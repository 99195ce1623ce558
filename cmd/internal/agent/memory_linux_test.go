//go:build linux

package agent

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// smapsFixture is /proc/<pid>/smaps of a featureplug agent, shortened:
// its text (partly in 2 MiB pages), the RELRO page that the dynamic
// linker wrote, its data, and the heap.
const smapsFixture = `00411000-0139f000 r-xp 00011000 fe:00 9994392                            /usr/bin/featureplug
Size:              16056 kB
Rss:               15928 kB
Anonymous:             0 kB
FilePmdMapped:     12288 kB
VmFlags: rd ex mr mw me
02618000-02619000 r--p 02217000 fe:00 9994392                            /usr/bin/featureplug
Rss:                   4 kB
Anonymous:             4 kB
FilePmdMapped:         0 kB
VmFlags: rd mr mw me ac
02619000-026b9000 rw-p 02218000 fe:00 9994392                            /usr/bin/featureplug
Rss:                 548 kB
Anonymous:           140 kB
VmFlags: rd wr mr mw me ac
0f37e000-0f39f000 rw-p 00000000 00:00 0                                  [heap]
Rss:                   8 kB
Anonymous:             8 kB
VmFlags: rd wr mr mw me ac
`

func TestParseSmaps(t *testing.T) {
	maps, err := parseSmaps([]byte(smapsFixture))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		start, end uint64
		inode      uint64
		rss, pmd   int64
		releasable bool
	}
	var got []row
	for _, m := range maps {
		got = append(got, row{m.start, m.end, m.inode, m.rss, m.pmdMapped, m.releasable()})
	}
	want := []row{
		{0x411000, 0x139f000, 9994392, 15928 << 10, 12288 << 10, true},
		{0x2618000, 0x2619000, 9994392, 4 << 10, 0, false},   // written by the dynamic linker
		{0x2619000, 0x26b9000, 9994392, 548 << 10, 0, false}, // writable
		{0xf37e000, 0xf39f000, 0, 8 << 10, 0, false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseSmaps:\n got %+v\nwant %+v", got, want)
	}
	if maps[0].dev != 0xfe00 {
		t.Errorf("device of fe:00 = %#x, want 0xfe00", maps[0].dev)
	}
}

func TestParseSmapsErrors(t *testing.T) {
	for name, in := range map[string]string{
		"field first":   "Rss: 4 kB\n",
		"bad range":     "00411000 r-xp 00011000 fe:00 1 /x\n",
		"bad rss":       "00411000-00412000 r-xp 00011000 fe:00 1 /x\nRss: four kB\n",
		"bad unit":      "00411000-00412000 r-xp 00011000 fe:00 1 /x\nRss: 4 MB\n",
		"bad device":    "00411000-00412000 r-xp 00011000 fe00 1 /x\n",
		"short header":  "00411000-00412000 r-xp\n",
		"inode not int": "00411000-00412000 r-xp 00011000 fe:00 x /x\n",
	} {
		if _, err := parseSmaps([]byte(in)); err == nil {
			t.Errorf("%s: parseSmaps(%q) = nil error", name, in)
		} else if !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: error %q does not name the line", name, err)
		}
	}
}

// TestReleaseBinaryPages releases the test binary's own pages: the text
// and read-only data are advised (never again in 2 MiB pages), nothing
// that was written is, and the process goes on running.
func TestReleaseBinaryPages(t *testing.T) {
	res, err := ReleaseBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	if res.Mappings < 2 {
		t.Errorf("advised %d mappings, want the text and the read-only data at least", res.Mappings)
	}
	if res.Before <= 0 {
		t.Errorf("resident before = %d, want > 0", res.Before)
	}
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := parseSmaps(data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	released, err := binaryMappings(f)
	if err != nil {
		t.Fatal(err)
	}
	var text bool
	for _, r := range released {
		for _, m := range maps {
			if m.start != r.start {
				continue
			}
			if !slices.Contains(m.flags, "nh") {
				t.Errorf("mapping %#x-%#x %s: VmFlags %v lack nh (MADV_NOHUGEPAGE)", m.start, m.end, m.perms, m.flags)
			}
			if slices.Contains(m.flags, "rr") {
				t.Errorf("mapping %#x-%#x %s: VmFlags %v still have rr (MADV_RANDOM)", m.start, m.end, m.perms, m.flags)
			}
			if m.pmdMapped != 0 {
				t.Errorf("mapping %#x-%#x %s: %d bytes still in 2 MiB pages", m.start, m.end, m.perms, m.pmdMapped)
			}
			text = text || m.perms == "r-xp"
		}
	}
	if !text {
		t.Errorf("the text was not among the released mappings %+v", released)
	}
	for _, m := range maps {
		if !m.releasable() && slices.Contains(m.flags, "nh") && m.inode != 0 {
			t.Errorf("mapping %#x-%#x %s (written or writable) was advised: VmFlags %v", m.start, m.end, m.perms, m.flags)
		}
	}
}
