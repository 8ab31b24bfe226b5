"""Persona drivers: chat sessions, agent swarms and trace replay, each a gevent loop in a Locust process."""
