package harness

import (
	"slices"
	"testing"
)

func TestParseCRILog(t *testing.T) {
	log := "2026-12-01T21:00:00.000000001Z stdout P part one, \n" +
		"2026-12-01T21:00:00.000000002Z stdout F part two\n" +
		"2026-12-01T21:00:00.000000003Z stderr F \n" +
		"2026-12-01T21:00:00.000000004Z stdout F whole line\n"
	got, err := parseCRILog([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"part one, part two", "", "whole line"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	if _, err := parseCRILog([]byte("garbage\n")); err == nil {
		t.Error("a line without time, stream and tag parsed")
	}
}
