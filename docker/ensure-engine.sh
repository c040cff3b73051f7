#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io (+ docker-compose for SageMaker local mode,
# debootstrap for the locally made base image) and start dockerd when none runs.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
# An engine named elsewhere (DOCKER_HOST) is not ours to start: say which did not answer.
case "${DOCKER_HOST:-unix:///var/run/docker.sock}" in
  unix:///var/run/docker.sock|unix:///run/docker.sock) ;;
  *) echo "no Docker engine answers at DOCKER_HOST=$DOCKER_HOST ($(docker info 2>&1 | tail -1));" \
       "start that one, or unset DOCKER_HOST to have this script start a local engine" >&2
     exit 1;;
esac
if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "installing docker.io docker-compose debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd (log: /var/log/dockerd.log)"
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 90); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! docker info >/dev/null 2>&1; then
  echo "no Docker engine: dockerd did not start:" >&2
  tail -20 /var/log/dockerd.log >&2 || true
  exit 1
fi
