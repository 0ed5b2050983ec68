package metadata_test

import (
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    []string // substrings of the error; none means valid
	}{
		{"valid", `{"name":"topology","version":"1.0.0","abi":1,"stages":["topology"],"minHostVersion":"0.1.0"}`, nil},
		{"several stages", `{"name":"all","version":"v2.3.4-rc.1","abi":1,"stages":["topology","traffic-policy","endpoint-selection"]}`, nil},
		{"not json", `name: x`, []string{"module metadata"}},
		{"unknown field", `{"name":"x","version":"1.0.0","abi":1,"stages":["topology"],"extra":1}`, []string{`unknown field "extra"`}},
		{"every problem at once", `{"name":"Bad_Name","version":"one","abi":2,"stages":["routing","topology","topology"],"minHostVersion":"soon"}`,
			[]string{"metadata.name", "metadata.version", "metadata.abi: 2", `metadata.stages[0]: unknown stage "routing"`, `metadata.stages[2]: duplicate stage "topology"`, "metadata.minHostVersion"}},
		{"no stages", `{"name":"x","version":"1.0.0","abi":1,"stages":[]}`, []string{"metadata.stages: at least one"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := metadata.Parse([]byte(tc.payload))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if m.ABI != abi.Version || !m.Implements(abi.StageTopology) {
					t.Errorf("parsed %+v", m)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error, got %+v", m)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMarshalStable(t *testing.T) {
	m := &metadata.Metadata{Name: "x", Version: "1.0.0", ABI: 1, Stages: []string{"topology"}}
	a, _ := m.Marshal()
	b, _ := m.Marshal()
	if string(a) != string(b) || string(a) != `{"name":"x","version":"1.0.0","abi":1,"stages":["topology"]}` {
		t.Errorf("Marshal gave %s then %s", a, b)
	}
}
