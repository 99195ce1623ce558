package harness

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images a RealNode's containerd holds, built locally: no registry is
// ever contacted.
const (
	// PauseImage is the sandbox image: a static program that sleeps until
	// SIGTERM (internal/podimage/pause).
	PauseImage = "featureplug.local/pause:1"
	// ProbeImage is the image of the containers tests run: a static program
	// that reports what it sees as a podprobe.Report
	// (internal/podimage/probe). Pods must say imagePullPolicy Never.
	ProbeImage = "featureplug.local/probe:1"
)

// podImage is a locally built image: one layer holding one static Go
// program at /<name>, its entrypoint.
type podImage struct {
	ref string
	pkg string // the program's package, in the test module
}

var podImages = []podImage{
	{ref: PauseImage, pkg: "./harness/internal/podimage/pause"},
	{ref: ProbeImage, pkg: "./harness/internal/podimage/probe"},
}

// buildPodImages builds every podImage into an image archive (docker save
// format, which `ctr images import` takes) under dir and returns the
// archives' paths. moduleDir is the test module's root.
func buildPodImages(moduleDir, dir string) ([]string, error) {
	var out []string
	for _, im := range podImages {
		prog := im.pkg[strings.LastIndex(im.pkg, "/")+1:]
		bin := filepath.Join(dir, prog)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, im.pkg)
		cmd.Dir = moduleDir
		// Static: the image has no libc.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s for image %s: %w\n%s", im.pkg, im.ref, err, b)
		}
		archive := filepath.Join(dir, prog+".tar")
		if err := writeImage(im.ref, bin, "/"+prog, archive); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.ref, err)
		}
		out = append(out, archive)
	}
	return out, nil
}

// writeImage writes, as an image archive tagged ref, an image of one layer
// holding the program bin at path in the image, which is its entrypoint.
func writeImage(ref, bin, path, archive string) error {
	prog, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(prog)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(prog); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{path}}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(archive, tag, img)
}
