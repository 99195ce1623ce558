// Command probe is the container of RealNode's probe image: it prints, as
// one line starting with podprobe.Marker, the JSON podprobe.Report of what
// it sees, then exits, or with -wait stays until SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/featureplug/featureplug/test/harness/podprobe"
)

// files collects the repeated -touch flags.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	started := time.Now()
	var touch files
	flag.Var(&touch, "touch", "create this file before reporting (repeatable)")
	wait := flag.Bool("wait", false, "stay until SIGTERM after reporting")
	flag.Parse()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	b, err := json.Marshal(podprobe.Collect(started, touch))
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	fmt.Printf("%s%s\n", podprobe.Marker, b)
	if *wait {
		<-stop
	}
}
