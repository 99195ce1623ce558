package rules_test

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
)

// TestTemplateNameWithPlusHint: a template that keeps the '+' of a +me MIG
// profile gets a short error saying how to fix it, not Kubernetes' name
// regex.
func TestTemplateNameWithPlusHint(t *testing.T) {
	rs, err := rules.Parse("me.yaml", []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"+"- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n"))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	err = rs.CheckNodes(nodes)
	if err == nil {
		t.Fatal("check passes a template that gives '+' names")
	}
	msg := err.Error()
	if !strings.Contains(msg, `may not contain '+'`) || !strings.Contains(msg, `{{ .profile | replace "+" "." }}`) || strings.Contains(msg, "regex used for validation") {
		t.Errorf("error:\n%s", msg)
	}
}
