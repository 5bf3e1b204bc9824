package beamkafka

import (
	"encoding/json"
	"flag"
	"testing"
)

func TestEveryOptionIsAFlagAndAProgramsOwnFlagStays(t *testing.T) {
	fs := flag.NewFlagSet("p", flag.ContinueOnError)
	own := fs.String("bootstrap_servers", "mine", "the program's own")
	defineFlags(fs)
	for _, o := range Options {
		if fs.Lookup(o.Name) == nil {
			t.Errorf("no flag --%s", o.Name)
		}
	}
	args := []string{"--bootstrap_servers=k:9092", "--internal_parallelism=4", "--keep_runner_topics",
		"--kafka_property=security.protocol=SSL", "--kafka_property=a=\"b\\c"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if *own != "k:9092" {
		t.Errorf("the program's flag got %q", *own)
	}
	if got := fs.Lookup("internal_parallelism").Value.String(); got != "4" {
		t.Errorf("internal_parallelism = %q", got)
	}
	if got := fs.Lookup("keep_runner_topics").Value.String(); got != "true" {
		t.Errorf("keep_runner_topics = %q", got)
	}
	if err := fs.Parse([]string{"--internal_parallelism=four"}); err == nil {
		t.Error("a whole number is checked as the program starts")
	}
}

func TestARepeatedFlagGoesAsAJSONListAndOneValueAsItself(t *testing.T) {
	var l listFlag
	if l.String() != "" {
		t.Errorf("unset: %q", l.String())
	}
	_ = l.Set("security.protocol=SSL")
	if l.String() != "security.protocol=SSL" {
		t.Errorf("one value: %q", l.String())
	}
	_ = l.Set("sasl.jaas.config=x \"q\"\\\n")
	var back []string
	if err := json.Unmarshal([]byte(l.String()), &back); err != nil {
		t.Fatalf("%q is not JSON: %v", l.String(), err)
	}
	if len(back) != 2 || back[1] != "sasl.jaas.config=x \"q\"\\\n" {
		t.Errorf("round trip: %q", back)
	}
}
