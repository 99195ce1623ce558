package stubgen

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Widget is a handle type for the tests: library calls WidgetM(w, ...)
// forward to w.M(...).
type Widget interface {
	Resize(n int, sizes ...uint32) ([]time.Duration, nvml.Return)
	Name() string
	Close() nvml.Return
}

// WidgetLibrary stands for a library interface with calls of several
// shapes.
type WidgetLibrary interface {
	WidgetResize(Widget, int, ...uint32) ([]time.Duration, nvml.Return)
	WidgetName(Widget) string
	// The handle has Close() nvml.Return: a different signature, so
	// WidgetClose is a stub.
	WidgetClose(Widget, bool) nvml.Return
	Pointer(unsafe.Pointer, map[string][]*nvml.Sample) (chan<- error, <-chan int)
	Variadic(...func(int) bool) (nvml.Return, nvml.Return)
	Nothing()
	Any(any) (any, nvml.Return)
}

// TestGenerateShapes generates stubs for calls of every shape the generator
// handles: forwarded and variadic calls, types from other packages, unnamed
// types, several or no nvml.Return results.
func TestGenerateShapes(t *testing.T) {
	c := Config{
		Package: "widgets",
		Stubs:   []Stub{{Name: "unsupportedWidgets", Type: reflect.TypeFor[WidgetLibrary](), Forward: true}},
		Targets: []Target{{Prefix: "Widget", Type: reflect.TypeFor[Widget]()}},
	}
	src, err := c.Generate()
	if err != nil {
		t.Fatal(err)
	}
	got := string(src)
	for _, want := range []string{
		Header + "\n\npackage widgets\n",
		"\t\"github.com/NVIDIA/go-nvml/pkg/nvml\"\n",
		"\t\"github.com/featureplug/featureplug/discovery/fakenode/internal/stubgen\"\n",
		"\t\"time\"\n",
		"\t\"unsafe\"\n",
		"// unsupportedWidgets implements stubgen.WidgetLibrary: every method returns\n",
		"\ntype unsupportedWidgets struct{}\n",
		"\nvar _ stubgen.WidgetLibrary = unsupportedWidgets{}\n",
		// Forwarded, variadic.
		"func (unsupportedWidgets) WidgetResize(a0 stubgen.Widget, a1 int, a2 ...uint32) (r0 []time.Duration, ret nvml.Return) {\n" +
			"\tif a0 == nil {\n\t\treturn r0, nvml.ERROR_INVALID_ARGUMENT\n\t}\n" +
			"\treturn a0.Resize(a1, a2...)\n}",
		// Forwarded, no nvml.Return result.
		"func (unsupportedWidgets) WidgetName(a0 stubgen.Widget) (r0 string) {\n" +
			"\tif a0 == nil {\n\t\treturn r0\n\t}\n\treturn a0.Name()\n}",
		// Signature differs from the handle's: a stub.
		"func (unsupportedWidgets) WidgetClose(stubgen.Widget, bool) nvml.Return {\n\treturn nvml.ERROR_NOT_SUPPORTED\n}",
		"func (unsupportedWidgets) Pointer(unsafe.Pointer, map[string][]*nvml.Sample) (r0 chan<- error, r1 <-chan int) {\n\treturn r0, r1\n}",
		"func (unsupportedWidgets) Variadic(...func(int) bool) (nvml.Return, nvml.Return) {\n\treturn nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED\n}",
		"func (unsupportedWidgets) Nothing() {}",
		"func (unsupportedWidgets) Any(any) (r0 any, ret nvml.Return) {\n\treturn r0, nvml.ERROR_NOT_SUPPORTED\n}",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("generated source lacks\n%s\n--- source:\n%s", want, got)
		}
	}
}

// BadLibrary has a call that takes an unexported type, which generated
// code in another package cannot name.
type BadLibrary interface {
	Bad(unexported) nvml.Return
}

type unexported int

// TestGenerateRejects checks that what generated code cannot name or
// implement fails with an error that names the method or type.
func TestGenerateRejects(t *testing.T) {
	tests := []struct {
		name string
		stub Stub
		want []string
	}{
		{"unexported type", Stub{Name: "bad", Type: reflect.TypeFor[BadLibrary]()}, []string{"method Bad", "unexported"}},
		{"not an interface", Stub{Name: "bad", Type: reflect.TypeFor[Config]()}, []string{"stub bad", "not an interface"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Config{Package: "x", Stubs: []Stub{tt.stub}}.Generate()
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Generate = %v, want an error containing %q", err, want)
				}
			}
		})
	}
}
