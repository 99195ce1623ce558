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

// WidgetMock stands for a moq mock struct with calls of several shapes.
type WidgetMock struct {
	WidgetResizeFunc func(Widget, int, ...uint32) ([]time.Duration, nvml.Return)
	WidgetNameFunc   func(Widget) string
	// The handle has Close() nvml.Return: a different signature, so
	// WidgetClose is a stub.
	WidgetCloseFunc func(Widget, bool) nvml.Return
	PointerFunc     func(unsafe.Pointer, map[string][]*nvml.Sample) (chan<- error, <-chan int)
	VariadicFunc    func(...func(int) bool) (nvml.Return, nvml.Return)
	NothingFunc     func()
	AnyFunc         func(any) (any, nvml.Return)
	notAFunc        int    //nolint:unused // the generator must skip it
	Callback        func() // no Func suffix: skipped
}

// TestGenerateShapes generates stubs for calls of every shape the generator
// handles: forwarded and variadic calls, types from other packages, unnamed
// types, several or no nvml.Return results.
func TestGenerateShapes(t *testing.T) {
	c := Config{
		Package: "widgets",
		Mocks:   []Mock{{Func: "fillWidget", Type: reflect.TypeFor[WidgetMock](), Forward: true}},
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
		"func fillWidget(m *stubgen.WidgetMock) {",
		// Forwarded, variadic.
		"m.WidgetResizeFunc = func(a0 stubgen.Widget, a1 int, a2 ...uint32) (r0 []time.Duration, ret nvml.Return) {\n" +
			"\t\tif a0 == nil {\n\t\t\treturn r0, nvml.ERROR_INVALID_ARGUMENT\n\t\t}\n" +
			"\t\treturn a0.Resize(a1, a2...)\n\t}",
		// Forwarded, no nvml.Return result.
		"m.WidgetNameFunc = func(a0 stubgen.Widget) (r0 string) {\n" +
			"\t\tif a0 == nil {\n\t\t\treturn r0\n\t\t}\n\t\treturn a0.Name()\n\t}",
		// Signature differs from the handle's: a stub.
		"m.WidgetCloseFunc = func(stubgen.Widget, bool) nvml.Return {\n\t\treturn nvml.ERROR_NOT_SUPPORTED\n\t}",
		"m.PointerFunc = func(unsafe.Pointer, map[string][]*nvml.Sample) (r0 chan<- error, r1 <-chan int) {\n\t\treturn r0, r1\n\t}",
		"m.VariadicFunc = func(...func(int) bool) (nvml.Return, nvml.Return) {\n\t\treturn nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED\n\t}",
		"m.NothingFunc = func() {}",
		"m.AnyFunc = func(any) (r0 any, ret nvml.Return) {\n\t\treturn r0, nvml.ERROR_NOT_SUPPORTED\n\t}",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("generated source lacks\n%s\n--- source:\n%s", want, got)
		}
	}
	for _, notWant := range []string{"notAFunc", "Callback"} {
		if strings.Contains(got, notWant) {
			t.Errorf("generated source sets %s:\n%s", notWant, got)
		}
	}
}

// UnexportedMock has a call that takes an unexported type, which generated
// code in another package cannot name.
type UnexportedMock struct {
	BadFunc func(unexported) nvml.Return
}

type unexported int

// TestGenerateRejects checks that a type generated code cannot name fails
// with an error that names the field.
func TestGenerateRejects(t *testing.T) {
	c := Config{Package: "x", Mocks: []Mock{{Func: "fillBad", Type: reflect.TypeFor[UnexportedMock]()}}}
	_, err := c.Generate()
	if err == nil || !strings.Contains(err.Error(), "field BadFunc") || !strings.Contains(err.Error(), "unexported") {
		t.Errorf("Generate = %v, want an error naming field BadFunc and the unexported type", err)
	}
}
