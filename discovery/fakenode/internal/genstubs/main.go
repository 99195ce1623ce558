// Command genstubs writes discovery/fakenode's stubs_gen.go (see package
// stubgen). Run it through go generate:
//
//	go generate ./discovery/fakenode
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/featureplug/featureplug/discovery/fakenode/internal/stubgen"
)

func main() {
	out := flag.String("o", "stubs_gen.go", "file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genstubs:", err)
		os.Exit(1)
	}
}

// run writes the stubs to path.
func run(path string) error {
	src, err := stubgen.Generate()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		return fmt.Errorf("write stubs: %w", err)
	}
	return nil
}
