package rulesengine

import "testing"

func TestEngine(t *testing.T) {
	e := New()
	if len(e.Builtins) == 0 || e.MaxFileSize <= 0 {
		t.Fatalf("builtins %v, max file size %d", e.Builtins, e.MaxFileSize)
	}
	if rs, err := e.Load("not-a-builtin-nor-a-file"); err == nil || rs != nil {
		t.Errorf("Load of a missing file = %v, %v; want a nil RuleSet and an error", rs, err)
	}
	if rs, err := e.Parse("bad.yaml", []byte("rules: [")); err == nil || rs != nil {
		t.Errorf("Parse of bad YAML = %v, %v; want a nil RuleSet and an error", rs, err)
	}
	rs, err := e.Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	if rs.Source() == "" {
		t.Error("the builtin has no source")
	}
	if e.Default().Source() == "" {
		t.Error("the default rules have no source")
	}
}
