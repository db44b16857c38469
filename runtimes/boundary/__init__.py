"""The runtimes' in-sandbox code, standard library only, mounted (or copied)
read-only into sandboxes: the agent (agent.py, with nest.py for the local
zygote's forks), the browser sandbox's launcher (launcher.py), and the jail
backend's launcher and reaper (jail_launch.py). Each is a program of its
own, run as `python3 -I -S FILE`; none imports sandgym."""
