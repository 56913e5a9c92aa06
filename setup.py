"""Package setup read from settings.ini (nbdev 2 layout, no pkg_resources)."""
from configparser import ConfigParser
from pathlib import Path
import setuptools
from setuptools.command.editable_wheel import editable_wheel

cfg = ConfigParser(delimiters=['='])
cfg.read(Path(__file__).parent/'settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

def reqs(key):
    "Requirement list stored under `key` in settings.ini."
    return cfg.get(key, '').split()

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
lic = licenses[cfg['license']]
py_versions = '3.10 3.11 3.12 3.13'.split()
min_python = cfg['min_python']

class editable_wheel_with_data(editable_wheel):
    "`pip install -e .` installing data_files: setuptools' editable wheel asks for `has_data`, not `has_data_files`."
    def _run_install(self, category):
        if category == 'data' and self.distribution.has_data_files(): self.run_command('install_data')
        else: super()._run_install(category)

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=(Path(__file__).parent/'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    author=cfg['author'], author_email=cfg['author_email'],
    license=lic[0], url=cfg['git_url'],
    keywords=cfg['keywords'].split(),
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title(),
                 'License :: ' + lic[1]] +
                ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    packages=setuptools.find_packages(include=['ppo_trt', 'ppo_trt.*']),
    include_package_data=True,
    package_data={'ppo_trt': ['templates/*.ipynb', 'templates/*.c', 'templates/docs/*', 'templates/c_library/*',
                               'templates/cortex_m/*', 'templates/targets/*', 'templates/hil/*']},
    install_requires=reqs('requirements'),
    extras_require={'dev': reqs('dev_requirements'), 'docs': reqs('docs_requirements'), 'gpu': reqs('gpu_requirements'),
                    'trt': reqs('trt_requirements'), 'trt-rtx': reqs('trt_rtx_requirements'),
                    'fast': reqs('fast_requirements'), 'sweep': reqs('sweep_requirements')},
    python_requires='>=' + min_python,
    zip_safe=False,
    # JupyterLab opens the notebooks unmodified: a Jupyter server extension, enabled where ppo_trt is installed
    data_files=[('etc/jupyter/jupyter_server_config.d', ['jupyter-config/jupyter_server_config.d/ppo_trt.json'])],
    cmdclass={'editable_wheel': editable_wheel_with_data},
    entry_points={'console_scripts': cfg['console_scripts'].split(),
                  'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
)
