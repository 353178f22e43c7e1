# shellcheck shell=bash
# Sourced by tools/bench-https.sh and tools/bench-proxy.sh (BENCH_ORIGIN=nginx), inside their lab: nginx
# (nginx-light) as a benchmark origin in the internet namespace.
#
# bench_nginx NAME DIR SERVER: writes DIR/nginx.conf and starts nginx as lab_bg NAME in netns inet. One
# process (no master, one worker: lab_pid NAME is the process that serves, like a single-threaded origin),
# no access log, keep-alive connections never closed by nginx during a run (1,000,000 requests, 600 s),
# "Server: nginx" without its version, sendfile, temporary files under DIR/tmp; SERVER is the server
# block's directives (listen, locations). The caller waits for the port.
bench_nginx() {
	local name=$1 dir=$2 server=$3
	if ! mkdir -p "$dir/tmp" || ! chmod 0755 "$dir" "$dir/tmp"; then lab_bail "cannot make $dir"; fi
	cat >"$dir/nginx.conf" <<-CONF
		daemon off;
		master_process off;
		worker_processes 1;
		pid $dir/nginx.pid;
		error_log $dir/error.log;
		events { worker_connections 4096; }
		http {
		  access_log off;
		  client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
		  uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
		  keepalive_requests 1000000;
		  keepalive_timeout 600s;
		  server_tokens off;
		  sendfile on;
		  server {
		$server
		  }
		}
	CONF
	lab_bg "$name" -n inet nginx -c "$dir/nginx.conf" -p "$dir"
}
