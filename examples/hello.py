"""Hello world: an agent, one message, its reply — three lines.

    python examples/hello.py

``run_sync`` runs the turn on the embedded default store (SQLite under ``$REVERIE_HOME``,
``~/.reverie`` unless set) as the local user, so ``reverie runs list`` shows it afterwards. The
scripted model answers offline; put ``model="openai:gpt-4.1-mini"`` (with ``OPENAI_API_KEY``
set) or ``model="ollama:llama3.1"`` to talk to a real one.
"""

from reverie import Agent
from reverie.testing import ScriptedModel, reply

agent = Agent(name="assistant", model=ScriptedModel([reply("Hello! How can I help?")]))
print(agent.run_sync("Hello!").text)
