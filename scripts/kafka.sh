#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft) for tests, CI and the demo.
#   kafka.sh fetch            resolve the pinned jars from Maven Central (cached)
#   kafka.sh start [PORT]     start a broker on localhost:PORT (default 9092), wait until ready
#   kafka.sh stop  [PORT]     stop it
#   kafka.sh status [PORT]    exit 0 when a broker answers on localhost:PORT
#   kafka.sh secure [PORT]    like start, plus a SASL_SSL listener on PORT+2: TLS with a
#                             throwaway CA, SCRAM-SHA-512 user beam / beam-secret; writes the
#                             client settings to <broker dir>/client.properties
#   kafka.sh kill [PORT]      SIGKILL the broker, keeping its data (a crash)
#   kafka.sh resume [PORT]    start a killed broker again on the same data
# Idempotent: start on a running broker and stop on a stopped one do nothing.
# BEAM_KAFKA_BROKER_PROPERTIES="key=value ..." adds broker settings (they win over the defaults).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

KAFKA_HOME="$BEAM_KAFKA_CACHE/kafka-$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"

fetch() {
  if [[ -f "$LIBS/.complete" ]]; then return 0; fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch Kafka jars"
  mkdir -p "$KAFKA_HOME"
  local pom="$KAFKA_HOME/pom.xml"
  cat > "$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam-kafka</groupId><artifactId>test-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_$KAFKA_SCALA</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  log "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central"
  maven_copy_jars "$pom" "$LIBS" "$KAFKA_HOME/fetch.log" \
    || { cat "$KAFKA_HOME/fetch.log" >&2; die "could not fetch Kafka jars (see above)"; }
}

port_dir() { echo "$BEAM_KAFKA_CACHE/broker-$1"; }

status() {
  local port="${1:-9092}"
  # A broker that accepts TCP may still be starting; ask the controller for metadata.
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 1
  java -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "localhost:$port" --list \
    --command-config /dev/null >/dev/null 2>&1
}

# A CA, a certificate for localhost signed by it (PKCS12 for the broker, PEM
# for clients), the SASL_SSL listener's settings and a client.properties.
make_tls() {
  local dir="$1" port="$2" pass="beam-kafka-test"
  command -v openssl >/dev/null || die "openssl is needed for a TLS broker (scripts/setup.sh installs it)"
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=beam-kafka test CA" \
      -keyout ca.key -out ca.pem >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr >/dev/null 2>&1
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
      -extfile san.ext -out broker.pem >/dev/null 2>&1
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -passout "pass:$pass" -out broker.p12
  ) || die "could not make the test broker's certificates"
  cat >> "$dir/server.properties" <<PROPS
ssl.keystore.type=PKCS12
ssl.keystore.location=$dir/broker.p12
ssl.keystore.password=$pass
ssl.key.password=$pass
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
PROPS
  cat > "$dir/client.properties" <<PROPS
bootstrap.servers=localhost:$((port + 2))
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=beam
sasl.password=beam-secret
ssl.ca.location=$dir/ca.pem
PROPS
}

start() {
  local port="${1:-9092}" ctrl=$(( ${1:-9092} + 1 )) secure="${SECURE:-}"
  fetch
  if status "$port"; then log "broker already answering on localhost:$port"; return 0; fi
  local dir; dir="$(port_dir "$port")"
  rm -rf "$dir"; mkdir -p "$dir/data"
  local listeners="PLAINTEXT://localhost:$port" map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n "$secure" ]]; then
    listeners="$listeners,SASL_SSL://localhost:$((port + 2))"; map="$map,SASL_SSL:SASL_SSL"
  fi
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:$ctrl
listeners=$listeners,CONTROLLER://localhost:$ctrl
advertised.listeners=$listeners
controller.listener.names=CONTROLLER
listener.security.protocol.map=$map
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Beam's large-key tests write keys of 100 MiB: requests up to 300 MiB
# (Kafka's default is 100 MiB; the runner learns the limit from the brokers).
socket.request.max.bytes=314572800
group.min.session.timeout.ms=1000
# KIP-848 groups (--group_protocol=consumer): a member learns of a new
# assignment at its next heartbeat (5 s by default) and a dead one is
# dropped after the session (45 s); tests of copies coming and going use
# what an operator tuning for fast hand-overs would.
group.consumer.min.heartbeat.interval.ms=100
group.consumer.heartbeat.interval.ms=100
group.consumer.min.session.timeout.ms=1000
group.consumer.session.timeout.ms=6000
# Transactions open past their timeout are aborted within a second (Kafka
# checks every 10 s by default), so a test of the timeout sees it happen.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
auto.create.topics.enable=false
delete.topic.enable=true
# Tests write records with made-up old timestamps: time-based retention
# would delete them (active segment included) at its next check.
log.retention.ms=-1
log.flush.interval.messages=9223372036854775807
PROPS
  cat > "$dir/log4j2.properties" <<L4J
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=FILE
appender.file.type=File
appender.file.name=FILE
appender.file.fileName=$dir/broker.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
L4J
  local kv
  for kv in ${BEAM_KAFKA_BROKER_PROPERTIES:-}; do printf '%s\n' "$kv" >> "$dir/server.properties"; done
  local scram=()
  if [[ -n "$secure" ]]; then
    make_tls "$dir" "$port"
    # SCRAM credentials are part of a KRaft cluster's metadata from the start.
    scram=(--add-scram 'SCRAM-SHA-512=[name=beam,password=beam-secret]')
  fi
  # A cluster id is 16 bytes in URL-safe base64 (22 characters).
  # Not starting with '-': kafka-storage would take it for an option (1 in 64).
  local cluster_id=-
  while [[ $cluster_id == -* ]]; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | head -c 22)"
  done
  java -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$LIBS/*" kafka.tools.StorageTool format \
      -t "$cluster_id" -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 \
    || { cat "$dir/format.log" >&2; die "could not format the broker's storage"; }
  launch "$port"
}

# Runs the broker configured in the port's directory and waits until it answers.
launch() {
  local port="$1" dir; dir="$(port_dir "$1")"
  log "starting Kafka $KAFKA_VERSION on localhost:$port (logs: $dir)"
  # Each network and I/O thread keeps (caches) a direct buffer as large as
  # the largest request it handled: after Beam's 100 MiB-key tests a dozen
  # such buffers exhausted the default direct memory (the heap's size) and
  # failed later requests. Buffers up to 128 MiB stay cached (one per read
  # would be allocated anew otherwise, which crawls), within 3 GiB.
  nohup java -Xms256m -Xmx1g -XX:MaxDirectMemorySize=3g -Djdk.nio.maxCachedBufferSize=134217728 \
      -Dlog4j2.configurationFile="$dir/log4j2.properties" \
      -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 &
  echo $! > "$dir/pid"
  for _ in $(seq 1 120); do
    if status "$port"; then log "broker ready on localhost:$port"; return 0; fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      tail -n 30 "$dir/stdout.log" "$dir/broker.log" >&2 2>/dev/null; die "the broker exited during start-up"
    fi
    sleep 1
  done
  die "the broker did not become ready on localhost:$port within 120 s (logs: $dir)"
}

kill_broker() {
  local port="${1:-9092}" dir; dir="$(port_dir "$port")"
  [[ -f "$dir/pid" ]] || die "no broker of ours on localhost:$port"
  kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
  rm -f "$dir/pid"
  log "broker on localhost:$port killed (data kept)"
}

resume() {
  local port="${1:-9092}" dir; dir="$(port_dir "$port")"
  fetch
  [[ -f "$dir/server.properties" ]] || die "no broker data for localhost:$port to resume (use start)"
  if status "$port"; then log "broker already answering on localhost:$port"; return 0; fi
  launch "$port"
}

stop() {
  local port="${1:-9092}" dir; dir="$(port_dir "$port")"
  [[ -f "$dir/pid" ]] || return 0
  local pid; pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    log "broker on localhost:$port stopped"
  fi
  rm -f "$dir/pid"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  fetch) fetch ;;
  start) start "$@" ;;
  secure) SECURE=1 start "$@" ;;
  stop) stop "$@" ;;
  status) fetch; status "$@" ;;
  kill) kill_broker "$@" ;;
  resume) resume "$@" ;;
  *) die "usage: kafka.sh fetch|start [PORT]|secure [PORT]|stop [PORT]|status [PORT]|kill [PORT]|resume [PORT]" ;;
esac
