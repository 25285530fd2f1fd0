#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A private clickhouse-server for tests: own config, own ports on 127.0.0.1, own data directory.
#   tests/tools/clickhouse-private.sh start DIR   starts one with its files under DIR; prints
#                                                 "http://127.0.0.1:PORT/" once it answers
#   tests/tools/clickhouse-private.sh stop DIR    stops the one started under DIR
# The HTTP port is picked free (from 18123 upwards); the native port is the next free one.
# CLICKHOUSE_COMPRESSION=zstd compresses the parts with zstd instead of ClickHouse's default LZ4
# (docs/operations.md: what the reference deployment sets).
set -u
cmd=${1:?usage: clickhouse-private.sh start|stop DIR}
dir=${2:?usage: clickhouse-private.sh start|stop DIR}
bin=${CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}
compression=${CLICKHOUSE_COMPRESSION:-lz4}

port_free() {
	! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null
}

pick_port() {
	local p=$1
	while ! port_free "$p" || [ "$p" = "${2:-0}" ]; do p=$((p + 1)); done
	echo "$p"
}

case $cmd in
start)
	[ -x "$bin" ] || { echo "clickhouse-private: $bin missing (apt-get install clickhouse-server)" >&2; exit 77; }
	mkdir -p "$dir"/data "$dir"/tmp "$dir"/user_files "$dir"/format_schemas "$dir"/log
	dir=$(cd "$dir" && pwd)
	# A restart in the same DIR keeps its ports (clients keep their URL) when they are free.
	if [ -f "$dir/http_port" ] && port_free "$(cat "$dir/http_port")" &&
		port_free "$(cat "$dir/tcp_port")"; then
		http=$(cat "$dir/http_port") tcp=$(cat "$dir/tcp_port")
	else
		base=$((18123 + RANDOM % 2000))
		http=$(pick_port "$base")
		tcp=$(pick_port $((http + 1)) "$http")
	fi
	cat >"$dir/users.xml" <<XML
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
    <profile>default</profile><quota>default</quota></default>
  <sysom><password>sysom-secret</password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></sysom></users>
  <quotas><default/></quotas>
</yandex>
XML
	cat >"$dir/config.xml" <<XML
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog><console>0</console></logger>
  <http_port>$http</http_port>
  <tcp_port>$tcp</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
  <merge_tree><parts_to_delay_insert>1000</parts_to_delay_insert><parts_to_throw_insert>3000</parts_to_throw_insert></merge_tree>
  <compression><case><min_part_size>0</min_part_size><min_part_size_ratio>0</min_part_size_ratio><method>$compression</method></case></compression>
</yandex>
XML
	"$bin" --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 &
	echo $! >"$dir/pid"
	echo "$http" >"$dir/http_port"
	echo "$tcp" >"$dir/tcp_port"
	for _ in $(seq 1 300); do
		if curl -sf "http://127.0.0.1:$http/ping" >/dev/null 2>&1; then
			echo "http://127.0.0.1:$http/"
			exit 0
		fi
		kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
		sleep 0.1
	done
	echo "clickhouse-private: server did not start; see $dir/log" >&2
	tail -5 "$dir/log/error.log" "$dir/log/stdout.log" >&2 2>/dev/null
	exit 1
	;;
stop)
	[ -f "$dir/pid" ] || exit 0
	pid=$(cat "$dir/pid")
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null
	rm -f "$dir/pid"
	;;
*)
	echo "usage: clickhouse-private.sh start|stop DIR" >&2
	exit 2
	;;
esac
