#!/bin/sh
# Host discovery script: print one host:slots line per usable host and exit 0.
# ringtrain runs it (no shell, no stdin, 30 s timeout by default) when --hosts names an
# executable file; horovodrun's --host-discovery-script uses the same output format.
printf '%s\n' gpu01:4 gpu02:4 gpu03:2
